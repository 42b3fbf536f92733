/**
 * Files that ship beside the code (package.json, nats.conf). The CLI runs from src/cli under tsx
 * in a checkout and from dist/src/cli once built, so a fixed `../../` would be wrong in one of
 * them: the package root is the nearest directory above this module holding docket's package.json.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function findPackageRoot(from: string): string | undefined {
  for (let dir = dirname(from); ; dir = dirname(dir)) {
    const candidate = join(dir, 'package.json');
    if (existsSync(candidate)) {
      try {
        if ((JSON.parse(readFileSync(candidate, 'utf8')) as { name?: unknown }).name === 'docket') return dir;
      } catch {
        // An unreadable package.json is not ours; keep looking above it.
      }
    }
    if (dirname(dir) === dir) return undefined;
  }
}

let root: string | undefined | null = null;

/** The absolute path of a file at the package root, or undefined when the root is not found. */
export function packageFile(name: string): string | undefined {
  if (root === null) root = findPackageRoot(fileURLToPath(import.meta.url));
  return root === undefined ? undefined : join(root, name);
}
