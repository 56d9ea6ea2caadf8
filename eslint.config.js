// @ts-check
/**
 * Lint gate (`npm run lint`, part of `npm run check`).
 *
 * - Library code (src/, entities/, migrations/, queues/, scripts/) gets
 *   typescript-eslint's type-checked recommended set: no `any` leaking out of
 *   a driver result unnoticed.
 * - Tests get the plain recommended set: they poke at parsed JSON on purpose.
 * - Everywhere, the promise rules that matter most in a ledger: a floating
 *   promise is a write nobody waits for (and whose failure nobody sees), and a
 *   promise passed where a void callback is expected swallows its rejection.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const TS = ['**/*.ts'];
const LIBRARY = ['src/**/*.ts', 'entities/**/*.ts', 'migrations/**/*.ts', 'queues/**/*.ts', 'scripts/**/*.ts'];

export default tseslint.config(
  { ignores: ['node_modules/', '.taskledger/', 'coverage/', 'dist/', 'test/schema/*.sql'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: TS,
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' },
      ],
    },
  },
  ...tseslint.configs.recommendedTypeChecked.map((config) => ({ ...config, files: LIBRARY })),
  {
    // TypeORM's DataSource takes entity classes as `Function[]`.
    files: ['entities/index.ts'],
    rules: { '@typescript-eslint/no-unsafe-function-type': 'off' },
  },
  {
    // Tests build malformed documents on purpose through `any`.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Plain JavaScript (bin/, this file, ecosystem.config.js) is outside tsconfig.json: no type-aware rules.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
        performance: 'readonly',
        setTimeout: 'readonly',
      },
    },
  },
);
