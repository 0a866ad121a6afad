/** Keys per `IN (...)` of a byIds-style read: well under either database's limit on bound parameters. */
export const ID_CHUNK = 1000;

/**
 * The rows of `keys`, read ID_CHUNK keys per query, one query after another: a cache applying a burst of
 * changes at once (BatchedRefresh) costs a few round trips, never one per key.
 */
export async function inChunks<K, R>(keys: readonly K[], read: (chunk: K[]) => R[] | Promise<R[]>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < keys.length; i += ID_CHUNK) out.push(...await read(keys.slice(i, i + ID_CHUNK)));
  return out;
}
