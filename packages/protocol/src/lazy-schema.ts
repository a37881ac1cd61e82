/*
 * Schemas built on first use. Every route's schemas were built when the protocol loaded: ~1 MB
 * of an idle agent's heap (SPEC §8: idle agent ≤ 55 MB) that only registers, heartbeats and polls.
 * A lazy schema is a stand-in that builds the schema the first time anything reads it and from
 * then on answers every read, `in`, `instanceof` and method call with the built schema's, so the
 * server, the client and the CLI validate exactly as before.
 */

const builtKey = Symbol.for("drover.builtLazySchemas");

/**
 * The names of the lazy schemas built so far in this process, in order: one list for every copy
 * of this module (the agent bundle's and tsc's), so a test's preload sees what the agent built.
 */
export const builtLazySchemas: string[] = ((globalThis as { [builtKey]?: string[] })[builtKey] ??= []);

/**
 * `build()`'s schema, built the first time it is used. `name` says which (builtLazySchemas).
 * The result has the built schema's type; its identity is the stand-in's (a parent schema that
 * nests it holds the stand-in).
 */
export function lazySchema<T extends object>(name: string, build: () => T): T {
  let built: T | undefined;
  const schema = (): T => {
    if (built === undefined) {
      built = build();
      builtLazySchemas.push(name);
    }
    return built;
  };
  // The target holds nothing: every trap answers from the built schema. A property is reported
  // configurable (a proxy may not report a property non-configurable that its target lacks).
  return new Proxy(Object.create(null) as T, {
    get: (_, key) => Reflect.get(schema(), key),
    has: (_, key) => Reflect.has(schema(), key),
    set: (_, key, value) => Reflect.set(schema(), key, value),
    getPrototypeOf: () => Reflect.getPrototypeOf(schema()),
    ownKeys: () => Reflect.ownKeys(schema()),
    getOwnPropertyDescriptor: (_, key) => {
      const found = Reflect.getOwnPropertyDescriptor(schema(), key);
      return found === undefined ? undefined : { ...found, configurable: true };
    },
    defineProperty: (_, key, descriptor) => Reflect.defineProperty(schema(), key, descriptor),
    deleteProperty: (_, key) => Reflect.deleteProperty(schema(), key),
  });
}
