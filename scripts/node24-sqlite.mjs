// Preloaded (--import, through NODE_OPTIONS) into every Node process of the Node 24 smoke
// (scripts/node24.mjs): node_modules holds better-sqlite3's addon built for the Node that ran
// `npm ci`, so a load of it is sent to DROVER_TEST_SQLITE_ADDON, the same sources built for this
// Node. The repository's node_modules is shared with the Node 20 suite and stays as it is.
import * as nodeModule from "node:module";
import { pathToFileURL } from "node:url";

const addon = process.env.DROVER_TEST_SQLITE_ADDON;
const builtAddon = /[\\/]better-sqlite3[\\/]build[\\/]Release[\\/]better_sqlite3\.node$/;

// Synchronous hooks, which also see require() (better-sqlite3 loads its addon that way), came in
// Node 22.15; an older Node started beside the smoke is left alone.
if (addon && nodeModule.registerHooks) {
  nodeModule.registerHooks({
    resolve(specifier, context, next) {
      if (builtAddon.test(specifier)) return { url: pathToFileURL(addon).href, shortCircuit: true };
      return next(specifier, context);
    },
  });
}
