/** `health` (public liveness probe) and `metrics` (Prometheus text, admin): for monitoring scripts. */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { ApiError } from '../core/errors';

export function registerOps(program: Command, app: App): void {
  program.command('health')
    .description('Check that the gateway answers (no login needed): exit 0 healthy, 1 unhealthy, 3 unreachable')
    .addHelpText('after', '\nExamples:\n  $ gw health --url http://localhost:3000\n  $ until gw health >/dev/null 2>&1; do sleep 1; done')
    .action(app.action(async (ctx) => {
      const client = ctx.anonClient();
      const res = await client.raw('GET', '/health', {});
      if (res.status !== 200 || res.body?.status !== 'ok') {
        throw new ApiError(res.status, 'unhealthy', `the gateway at ${client.url} answered HTTP ${res.status} to /health`);
      }
      ctx.print(res.body, () => `ok: ${client.url}\n`);
    }));

  program.command('metrics')
    .description('Print the Prometheus metrics (admin); the text as served, also with --json (control characters blanked on a terminal)')
    .addHelpText('after', '\nExamples:\n  $ gw metrics | grep ^gateway_upstream_attempts_total\n  $ gw metrics > metrics.txt')
    .action(app.action(async (ctx) => {
      const text = await ctx.client().text('GET', '/metrics');
      ctx.raw(text.endsWith('\n') ? text : `${text}\n`);
    }));
}
