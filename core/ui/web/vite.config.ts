import { defineConfig } from "vite";

// The build goes to ../dist, which the Go package embeds; file names carry
// no hash so a rebuild changes only what changed.
export default defineConfig({
  base: "./",
  build: {
    outDir: "../dist",
    emptyOutDir: true,
    sourcemap: false,
    rollupOptions: {
      output: {
        entryFileNames: "assets/[name].js",
        chunkFileNames: "assets/[name].js",
        assetFileNames: "assets/[name][extname]",
      },
    },
  },
  server: {
    // `npm run dev` proxies the API to a running UI (meshrelay demo --serve).
    proxy: { "/api": process.env.MESHRELAY_UI ?? "http://127.0.0.1:9080" },
  },
});
