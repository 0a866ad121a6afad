import { expect, test } from 'bun:test';
import { Elysia, t } from 'elysia';
import { isPlaceholder, quietValidation } from './quiet-validation';

/** An app whose error hook records what Elysia built for a failed body validation. */
function app(quiet: boolean) {
  const seen: Array<{ message: string; custom: unknown; path: string | undefined }> = [];
  const a = new Elysia()
    .onError(({ error }) => {
      seen.push({ message: (error as Error).message, custom: (error as any).customError, path: (error as any).valueError?.path });
      return 'x';
    })
    .post('/x', () => 'ok', { body: t.Object({ name: t.String({ maxLength: 5 }), tags: t.Optional(t.Array(t.Object({ v: t.Integer() }))), own: t.Optional(t.String({ error: 'own text' })) }) });
  if (quiet) quietValidation(a.routes as any);
  return { a, seen };
}
const send = (a: Elysia<any, any, any, any, any, any, any>, body: unknown) =>
  a.handle(new Request('http://localhost/x', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }));

test('a failed validation never serialises the offending value into the error message', async () => {
  const marker = 'SECRET-VALUE-'.repeat(1000);
  const body = { name: 1, tags: Array.from({ length: 200 }, () => ({ v: marker })) };
  const plain = app(false);
  await send(plain.a, body);
  expect(plain.seen[0]!.message).toContain('SECRET-VALUE-'); // Elysia's own behaviour, which this module exists for

  const quiet = app(true);
  await send(quiet.a, body);
  const e = quiet.seen[0]!;
  expect(e.message).not.toContain('SECRET-VALUE-');
  expect(e.message.length).toBeLessThan(100);
  expect(isPlaceholder(e.custom)).toBe(true);
  expect(e.path).toBe('/name'); // TypeBox's first error is still there for the renderer
});

test("a schema's own error text is kept, and the placeholder does not show in the schema's JSON", async () => {
  const quiet = app(true);
  await send(quiet.a, { name: 'ok', own: 5 });
  expect(quiet.seen[0]!.custom).toBe('own text');
  expect(JSON.stringify((quiet.a.routes[0] as any).hooks.body)).not.toContain('validation');
});
