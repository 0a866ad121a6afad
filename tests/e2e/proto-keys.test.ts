/**
 * A JSON key named `__proto__`. On the management API (/api) any object of a body with one is refused, 400
 * invalid_value naming the key's path, nothing stored: the HTTP layer's body normalizer copies objects by assignment,
 * which dropped the key without a word (a channel header, a beta rewrite, a per-model limit or a top-level field of
 * that name answered 200 and was not saved). Credential and role refusals still come first. On /v1/messages such a
 * key is the client's data (a tool's input, a JSON schema's properties, metadata) and reaches native and translated
 * upstreams, and comes back from them, as sent. Bodies are raw JSON text: a JS literal `{ __proto__: … }` has no such key.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser } from '../helpers/gateway';
import { bothChannelTypes, keyedUser, send } from './relay-setup';

let env: Awaited<ReturnType<typeof bothChannelTypes>>;
beforeAll(async () => { env = await bothChannelTypes(); });
afterAll(() => env.stop());

async function raw(method: string, path: string, json: string, token: string | null = env.gw.rootToken) {
  const auth: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const res = await fetch(env.gw.url + path, { method, headers: { ...auth, 'content-type': 'application/json' }, body: json });
  return { status: res.status, body: await res.json() as any };
}

const channel = (extra: string) => `{"name":"proto","type":"openai","base_url":"http://127.0.0.1:9","key":"k","models":["m"],"timeout_ms":5000${extra}}`;
/** [method, path, body, the param named]: each body is valid but for its `__proto__` key. */
const REFUSED: Array<[string, string, string, string]> = [
  ['POST', '/api/channel/', channel(',"headers":{"x-a":"b","__proto__":"v"}'), 'headers.__proto__'],
  ['POST', '/api/channel/', channel(',"header_policy":{"beta_rewrite":{"__proto__":"x"}}'), 'header_policy.beta_rewrite.__proto__'],
  ['POST', '/api/channel/', channel(',"overrides":[{"op":"set","path":"metadata","value":{"user_id":"a","__proto__":{"x":1}}}]'), 'overrides[0].value.__proto__'],
  ['POST', '/api/channel/', channel(',"__proto__":{"priority":9}'), '__proto__'],
  ['POST', '/api/channel/', channel(',"model_mapping":{"m":"n","__proto__":"x"}'), 'model_mapping.__proto__'],
  ['POST', '/api/token/', '{"name":"k","model_limits":{"m":{"rate_limit_rpm":2},"__proto__":{"rate_limit_rpm":1}}}', 'model_limits.__proto__'],
  ['POST', '/api/group/', '{"name":"proto-g","model_limits":{"__proto__":{"rate_limit_rpm":1}}}', 'model_limits.__proto__'],
  ['PUT', '/api/pricing/', '{"model":"proto-m","input":1,"output":1,"__proto__":{"cache_read":5}}', '__proto__'],
];
const counts = async () => [
  await env.gw.db.get('select count(*) as n from channels'), await env.gw.db.get('select count(*) as n from api_keys'),
  await env.gw.db.get(`select count(*) as n from groups where name = 'proto-g'`), await env.gw.db.get(`select count(*) as n from prices where model = 'proto-m'`),
];

describe('management bodies', () => {
  test('a __proto__ key anywhere is 400 invalid_value naming its path; nothing is stored', async () => {
    const before = await counts();
    for (const [method, path, body, param] of REFUSED) {
      const r = await raw(method, path, body);
      expect({ path, param, status: r.status, error: r.body.error }).toMatchObject({ path, param, status: 400, error: {
        type: 'invalid_request_error', code: 'invalid_value', param, message: `${param}: "__proto__" cannot be used as a key (it would be dropped, not stored)`,
      } });
    }
    expect(await counts()).toEqual(before);
    // The same bodies without the key are accepted (the refusal is about the key, not the rest).
    const ok = await raw('POST', '/api/channel/', channel(',"headers":{"x-a":"b","proto":"v"}'));
    expect([ok.status, ok.body.data?.headers]).toEqual([200, { 'x-a': 'b', proto: 'v' }]);
  }, 20_000);

  test('credentials and role are checked first: 401 anonymous, 403 under-privileged, then the 400', async () => {
    const user = await makeUser(env.gw, 1);
    for (const [method, path, body, param] of REFUSED) {
      const anon = await raw(method, path, body, null);
      expect([path, param, anon.status, anon.body.error?.code]).toEqual([path, param, 401, 'not_logged_in']);
      const plain = await raw(method, path, body, user.token);
      // The token route is open to every user: its 400 comes right after the credentials.
      if (path === '/api/token/') expect([path, plain.status, plain.body.error?.param]).toEqual([path, 400, param]);
      else expect([path, param, plain.status, plain.body.error?.code]).toEqual([path, param, 403, 'insufficient_role']);
    }
    const self = await raw('PUT', '/api/user/self', '{"display_name":"x","__proto__":{"role":100}}', user.token);
    expect([self.status, self.body.error?.param]).toEqual([400, '__proto__']);
  }, 20_000);
});

describe('/v1/messages: __proto__ keys are the client\'s data', () => {
  const request = (model: string) => `{"model":"${model}","max_tokens":50,"metadata":{"user_id":"u","__proto__":{"m":1}},`
    + `"tools":[{"name":"t","input_schema":{"type":"object","properties":{"__proto__":{"type":"string"},"a":{"type":"string"}}}}],`
    + `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"t","input":{"__proto__":{"p":true},"a":"b"}}]},`
    + `{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"ok"}]}]}`;

  test('reach a native upstream as sent, and a translated one as the same JSON', async () => {
    const u = await keyedUser(env.gw);
    const n = await send(env.gw, u.key, request('native-m'));
    expect(n.status).toBe(200);
    expect(env.native.last().rawBody).toBe(request('native-m'));
    const o = await send(env.gw, u.key, request('oai-m'));
    expect(o.status).toBe(200);
    const sent = env.oai.last().rawBody;
    expect(sent).toContain('"parameters":{"type":"object","properties":{"__proto__":{"type":"string"},"a":{"type":"string"}}}');
    expect(sent).toContain(`"arguments":${JSON.stringify('{"__proto__":{"p":true},"a":"b"}')}`);
  });

  test('come back from upstream tool calls as sent: native, translated JSON and translated stream', async () => {
    const u = await keyedUser(env.gw);
    const args = '{"__proto__":{"p":1},"a":2}';
    const nativeAnswer = `{"id":"msg_1","type":"message","role":"assistant","model":"native-m","content":[{"type":"tool_use","id":"tu_1","name":"t","input":${args}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":3}}`;
    env.native.queue.push({ response: () => new Response(nativeAnswer, { headers: { 'content-type': 'application/json' } }) });
    const ask = (model: string, stream = false) => ({ model, max_tokens: 50, stream, messages: [{ role: 'user', content: 'hi' }] });
    const n = await send(env.gw, u.key, ask('native-m'));
    expect([n.status, n.text]).toEqual([200, expect.stringContaining(`"input":${args}`)]);

    const call = { id: 'call_1', type: 'function', function: { name: 't', arguments: args } };
    env.oai.queue.push({ rawJson: { id: 'c1', object: 'chat.completion', created: 1, model: 'oai-m', choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [call] }, finish_reason: 'tool_calls' }], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } } });
    const o = await send(env.gw, u.key, ask('oai-m'));
    expect([o.status, o.text]).toEqual([200, expect.stringContaining(`"input":${args}`)]);

    const chunk = (choice: unknown, usage?: unknown) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'oai-m', choices: choice ? [choice] : [], ...(usage ? { usage } : {}) })}\n\n`;
    env.oai.queue.push({ rawFrames: [
      chunk({ index: 0, delta: { role: 'assistant', tool_calls: [{ index: 0, ...call, function: { name: 't', arguments: '' } }] }, finish_reason: null }),
      chunk({ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: args } }] }, finish_reason: null }),
      chunk({ index: 0, delta: {}, finish_reason: 'tool_calls' }),
      chunk(null, { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }), 'data: [DONE]\n\n',
    ] });
    const s = await send(env.gw, u.key, ask('oai-m', true));
    expect(s.status).toBe(200);
    expect(s.text).toContain(`"partial_json":${JSON.stringify(args)}`);
  });
});
