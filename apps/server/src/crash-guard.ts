/**
 * What the process does with a throw no handler caught (in a timer, a socket's callback, an event listener) or a
 * rejection nobody awaited. Bun, like Node, ends the process on either: every stream, realtime session and drain
 * of every user on the node with it, and a client or upstream that found such a path (one upstream frame nested
 * 200,000 deep did) held a kill switch for the node. Each is logged as an error with its stack and counted
 * (`gateway_uncaught_errors_total{kind}`), and the process serves on: the request or session it came from fails
 * on its own path (a timeout, a close), and money stays behind transactions and unique request ids.
 */
import { errorText, type Counter, type Logger } from '@gw/core';

export function guardProcess(log: Logger, counter: Counter): () => void {
  const report = (kind: 'exception' | 'rejection') => (err: unknown) => {
    counter.inc({ kind });
    log.error('process.uncaught', { kind, cause: errorText(err), stack: err instanceof Error ? err.stack?.split('\n').slice(1, 8).join(' | ') ?? '' : '' });
  };
  const onException = report('exception');
  const onRejection = report('rejection');
  process.on('uncaughtException', onException);
  process.on('unhandledRejection', onRejection);
  return () => {
    process.off('uncaughtException', onException);
    process.off('unhandledRejection', onRejection);
  };
}
