// ESLint for the web client: the recommended rules of ESLint and typescript-eslint (no type
// information: they run in seconds). `npm run lint`; scripts/test.sh runs it beside the unit
// tests.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // dist/ is the build; src/gen/ is written by tygo from the Go shapes (checked by
  // scripts/gen-types-check.sh, not by hand).
  { ignores: ['dist/', 'src/gen/', 'node_modules/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.browser } },
  },
  {
    // TypeScript itself reports undefined names (typescript-eslint's advice).
    files: ['**/*.ts', '**/*.tsx'],
    rules: { 'no-undef': 'off' },
  },
  {
    // Node scripts and the browser tests (Node, with functions evaluated in the page).
    files: ['e2e/**/*.mjs', 'scripts/**/*.mjs', '*.js', '*.ts'],
    languageOptions: { globals: { ...globals.node, ...globals.browser } },
  },
);
