import { defineConfig } from 'vitest/config';

// The build goes to dist/, which frontend/embed.go embeds for both shells. emptyOutDir is
// off so dist/.gitkeep survives; `npm run build` removes the old output itself first.
export default defineConfig({
  base: './',
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: false,
    target: 'es2020',
    sourcemap: false,
  },
  server: {
    // `npm run dev` proxies the API to a local `cubicle serve` (default port).
    proxy: { '/api': 'http://127.0.0.1:8765' },
  },
  test: {
    include: ['src/**/*.test.ts', 'src/**/*.test.tsx'],
    environment: 'node',
  },
});
