import { defineConfig } from 'vitest/config';

// Pure tests (*.test.ts) and integration tests (*.int.test.ts, a real nats-server per file).
export default defineConfig({
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
        test: { name: 'int', include: ['test/**/*.int.test.ts'] },
      },
    ],
  },
});
