/** Where a management request came from, as a security notice reports it (address after TRUST_PROXY, User-Agent). */
import { clientIp } from './client-ip';

export function origin(ctx: { request: Request; server: Parameters<typeof clientIp>[1] }): { ip: string; userAgent: string } {
  return { ip: clientIp(ctx.request, ctx.server), userAgent: ctx.request.headers.get('user-agent') ?? '' };
}
