import { defineConfig } from "vite";

// The server serves dist/ at / (index.html for every /app/* path) and dist/assets/ with
// hashed names as immutable; nothing may be inlined into the page (the CSP forbids inline script).
export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    assetsDir: "assets",
    emptyOutDir: true,
    target: "es2022",
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    reportCompressedSize: false,
  },
});
