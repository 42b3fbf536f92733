#!/usr/bin/env node
// The CLI runs the TypeScript sources through tsx, so there is no build step between a
// checkout and `npx docket`.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
