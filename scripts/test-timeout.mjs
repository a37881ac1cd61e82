// Preloaded (--import) into every test file by run-tests.mjs: gives each test and hook that
// sets no timeout of its own a default one, so a hang fails under that test's name instead of
// stalling the whole run. Node 20's --test-timeout only bounds a file as a whole.
//
// It also notes, in DROVER_TEST_LINGER_LOG when the runner names one, a file whose process
// stayed up more than 5 s after its tests: a timer or handle left behind (or a slow `after`),
// which holds one of the runner's lanes for nothing.
import { appendFileSync } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";

const timeoutMs = Number(process.env.DROVER_TEST_TIMEOUT_MS);
const require = createRequire(import.meta.url);
const nodeTest = require("node:test");

// Only in the test files (the runner marks its children with NODE_TEST_CONTEXT): the process
// that runs them (test-files.mjs) gets this --import too, and passes it on.
if (process.env.NODE_TEST_CONTEXT !== undefined && Number.isSafeInteger(timeoutMs) && timeoutMs > 0) {
  /** test(name?, options?, fn?): adds `timeout` to the options, creating them if absent. */
  const forTest = (fn) =>
    function (...args) {
      const at = args.findIndex((a) => typeof a === "object" && a !== null);
      if (at >= 0) {
        if (args[at].timeout === undefined) args[at] = { ...args[at], timeout: timeoutMs };
      } else {
        const fnAt = args.findIndex((a) => typeof a === "function");
        args.splice(fnAt >= 0 ? fnAt : args.length, 0, { timeout: timeoutMs });
      }
      return fn.apply(this, args);
    };
  /** before(fn, options?) and friends: the options come second. */
  const forHook = (fn) =>
    function (hook, options) {
      return fn.call(this, hook, { ...options, timeout: options?.timeout ?? timeoutMs });
    };
  for (const name of ["test", "it"]) {
    const original = nodeTest[name];
    const wrapped = forTest(original);
    for (const variant of ["skip", "todo", "only"]) {
      if (typeof original[variant] === "function") wrapped[variant] = forTest(original[variant]);
    }
    nodeTest[name] = wrapped;
  }
  for (const name of ["before", "after", "beforeEach", "afterEach"]) nodeTest[name] = forHook(nodeTest[name]);
  syncBuiltinESMExports();

  // A test that timed out may leave handles (servers, intervals) that keep its file alive for
  // ever. Once the file's tests and hooks have had another full budget, end the process; the
  // results are already reported. The timer is unref'd: a clean file exits on its own.
  nodeTest.after(() => {
    const testsEnded = Date.now();
    const lingerLog = process.env.DROVER_TEST_LINGER_LOG;
    if (lingerLog)
      process.on("exit", () => {
        const stayed = Date.now() - testsEnded;
        if (stayed > 5_000) appendFileSync(lingerLog, `${process.argv[1] ?? "?"} ${Math.round(stayed / 1000)} s\n`);
      });
    // Registered after the test harness's own 'exit' listener, so the results are written first.
    // Ending here skips Node's native handle cleanup, which has been seen to spin for ever on a
    // socket whose close never completed (a file that had passed every test never exited).
    process.on("exit", (code) => process.reallyExit(process.exitCode ?? code));
    setTimeout(() => {
      process.stderr.write(
        `[run-tests] ${process.argv[1] ?? "a test file"} was still running ${timeoutMs} ms after its last test (open handles); ending it\n`,
      );
      process.exit(process.exitCode || 1);
    }, timeoutMs).unref();
  });
}
