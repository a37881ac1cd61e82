import js from "@eslint/js";
import tseslint from "typescript-eslint";

const serverPathMessage =
  "Call the server through the route table (routes.x with test/support/typed-api.ts or bench's api()), not a path literal.";
const rawClientMessage =
  "Call the Drover server through the typed client (test/support/typed-api.ts); for other HTTP servers disable this on the line and say which.";

// A dependency's files outside its `exports` map (or, without one, its built and internal
// folders) are private: they change in any release. test/layout/private-imports checks every
// import, require() and import() against the exports maps; this pattern says it in the editor.
const privatePaths = {
  regex: String.raw`^(@[^/]+/)?[^./@][^/]*/(.+/)?(lib|dist|src|build|internal|cjs|esm)(/|$)`,
  message: "Import a dependency by its published entry points (its package.json exports), not a private file.",
};

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**", "bench/results/**", "charts/**", "deploy/**/bin/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts", "**/*.tsx"],
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
    },
  },
  {
    files: ["**/*.ts", "**/*.tsx", "**/*.mts", "**/*.mjs", "**/*.js", "**/*.cjs"],
    rules: { "no-restricted-imports": ["error", { patterns: [privatePaths] }] },
  },
  {
    files: [
      "test/**/*.ts",
      "packages/*/test/**/*.ts",
      "deploy/*/test/**/*.ts",
      "tools/*/test/**/*.ts",
      "bench/src/**/*.ts",
    ],
    rules: { "@typescript-eslint/no-explicit-any": "off" },
  },
  {
    // A route's path is written once, in the route table: tests and the bench call the server
    // through it (test/support/typed-api.ts, bench/src/harness.ts). A test that must send a
    // request outside the table (an unknown path, a hand-built attack) disables the rule on that
    // line and says why. The Kubernetes API's own /api/v1/namespaces… paths are not ours.
    files: ["test/**/*.ts", "bench/src/**/*.ts"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: String.raw`Literal[value=/^\x2Fapi\x2F(v1|agent\x2Fv1)(?!\x2F(namespaces|nodes|pods))[\x2F?]/]`,
          message: serverPathMessage,
        },
        {
          selector: String.raw`TemplateElement[value.raw=/^\x2Fapi\x2F(v1|agent\x2Fv1)(?!\x2F(namespaces|nodes|pods))[\x2F?]/]`,
          message: serverPathMessage,
        },
      ],
      "no-restricted-imports": [
        "error",
        {
          paths: [
            {
              name: "undici",
              importNames: ["request", "fetch", "stream", "pipeline", "Client", "Pool"],
              message: rawClientMessage,
            },
          ],
          patterns: [privatePaths],
        },
      ],
      "no-restricted-globals": ["error", { name: "fetch", message: rawClientMessage }],
    },
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    languageOptions: {
      globals: {
        process: "readonly",
        console: "readonly",
        Buffer: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        URL: "readonly",
      },
    },
  },
);
