import type {
  KyselyPlugin,
  PluginTransformQueryArgs,
  PluginTransformResultArgs,
  QueryResult,
  RootOperationNode,
  UnknownRow,
} from "kysely";
import type { StoreContext } from "@drover/server";

/**
 * A store context whose every statement (in transactions too) is recorded as SQL, so a test can
 * say how many round trips an operation costs, e.g. that a batch is one statement, not one per row.
 */
export function loggingStatements(ctx: StoreContext): { ctx: StoreContext; statements: string[] } {
  const statements: string[] = [];
  const executor = ctx.db.getExecutor();
  const plugin: KyselyPlugin = {
    transformQuery({ node, queryId }: PluginTransformQueryArgs): RootOperationNode {
      statements.push(executor.compileQuery(node, queryId).sql);
      return node;
    },
    transformResult: async ({ result }: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> => result,
  };
  return { ctx: { ...ctx, db: ctx.db.withPlugin(plugin) }, statements };
}
