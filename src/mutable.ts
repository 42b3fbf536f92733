/** A type's fields made writable, for an object built field by field before it is handed on as the read-only type. */
export type Mutable<T> = { -readonly [K in keyof T]: T[K] };
