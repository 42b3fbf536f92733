import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Pure tests (*.test.ts) and integration tests (*.int.test.ts, a real nats-server per file).
export default defineConfig({
  // `import … from 'docket'` in a test means the sources; the built package is tested by
  // test/integration/package.int.test.ts, which installs the packed tarball.
  resolve: { alias: [{ find: /^docket$/, replacement: fileURLToPath(new URL('../src/index.ts', import.meta.url)) }] },
  test: {
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: ['test/**/*.int.test.ts'] },
      },
      {
        extends: true,
        // The CLI tests run bin/docket.js, which runs dist/: build it from the sources first.
        test: { name: 'int', include: ['test/**/*.int.test.ts'], globalSetup: ['test/support/build.ts'] },
      },
    ],
  },
});
