// Type-aware lint for two rules only: a promise dropped or passed where nothing awaits it loses
// its error. It type-checks every file (about 6× the time of `npx eslint .`), so it runs beside
// the test files in `npm test` (scripts/run-tests.mjs --lint, which runs it instead of `eslint .`:
// it holds every rule of the base config too) and on demand with `npm run lint:promises`.
import tseslint from "typescript-eslint";
import base from "./eslint.config.js";

export default tseslint.config(...base, {
  files: ["**/*.ts", "**/*.tsx"],
  languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
  rules: {
    "@typescript-eslint/no-floating-promises": [
      "error",
      // node:test registers these and awaits them itself.
      {
        allowForKnownSafeCalls: [
          {
            from: "package",
            package: "node:test",
            name: ["test", "describe", "it", "before", "after", "beforeEach", "afterEach", "suite"],
          },
        ],
      },
    ],
    "@typescript-eslint/no-misused-promises": "error",
  },
});
