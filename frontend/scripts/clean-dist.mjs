// Removes the previous build output but keeps dist/.gitkeep, which frontend/embed.go's
// `//go:embed all:dist` needs in a fresh clone (Vite runs with emptyOutDir: false).
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist');
for (const name of ['assets', 'index.html']) {
  rmSync(join(dist, name), { recursive: true, force: true });
}
