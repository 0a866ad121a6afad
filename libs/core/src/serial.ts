/**
 * Runs asynchronous steps one at a time, in the order they were queued. Caches refresh through one:
 * a refresh applies its read only after every earlier one applied, so an older read can never
 * overwrite a newer one (with SQLite reads resolve in call order anyway; a pool of PostgreSQL
 * connections can answer out of order). A failed step does not stop the ones after it.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(step: () => T | Promise<T>): Promise<T> {
    const result = this.tail.then(step);
    this.tail = result.catch(() => {});
    return result;
  }
}
