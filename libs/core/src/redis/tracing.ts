/**
 * ioredis 6 reports every command on diagnostics_channel's TracingChannel `ioredis:command` unless the
 * channel's `hasSubscribers` is `false`. Node has that getter (since 20.13 / 22.0); Bun 1.4's TracingChannel
 * does not, and ioredis reads the missing getter as "someone listens": every command, each admission's hold
 * and release among them, then built a trace context with its arguments copied to strings, ran through
 * `runStores`, published three events and came back through a wrapper promise (and a second one to silence
 * it), for nobody. The getter is added here as Node defines it (true while any of the five channels has a
 * subscriber), so a tracer that subscribes still sees every command.
 */
import dc from 'node:diagnostics_channel';

const PARTS = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'] as const;
type Part = { hasSubscribers?: boolean } | undefined;

/** Idempotent; does nothing where TracingChannel already says whether anyone listens. */
export function skipUnobservedTracing(): void {
  const proto = Object.getPrototypeOf(dc.tracingChannel('gw:tracing-probe')) as object;
  if ('hasSubscribers' in proto) return;
  Object.defineProperty(proto, 'hasSubscribers', {
    configurable: true,
    get(this: Record<(typeof PARTS)[number], Part>) {
      return PARTS.some((p) => this[p]?.hasSubscribers === true);
    },
  });
}
