/** A browser-like login: the session cookie a login sets, and management calls made with it. */
import { expect } from 'bun:test';
import type { TestGateway } from './gateway';

export async function loginCookie(gw: TestGateway, username: string, password: string, userAgent: string): Promise<string> {
  const res = await fetch(`${gw.url}/api/user/login`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'user-agent': userAgent }, body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

export async function callWithCookie(gw: TestGateway, method: string, path: string, cookie: string, body?: unknown) {
  const headers: Record<string, string> = { cookie, ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
  const res = await fetch(`${gw.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: await res.json() as any };
}
