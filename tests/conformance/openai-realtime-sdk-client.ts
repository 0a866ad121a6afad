/**
 * Runs the official OpenAI SDK's realtime WebSocket client, unmodified, against a gateway: the way a
 * user's program would, in its own process, trusting the gateway's certificate through
 * NODE_EXTRA_CA_CERTS (the SDK opens `new WebSocket(url, protocols)` and takes no TLS options).
 *
 * Input (env): GW_BASE_URL (`https://127.0.0.1:<port>/v1`), GW_KEY, GW_MODEL, GW_CLIENT (`ga` | `beta`).
 * Output: one JSON line on stdout: `{ protocol, url, events, error }` (every server event the SDK
 * emitted, in order). Exits 0 once `response.done` arrived, 1 otherwise (8 s budget).
 */
import OpenAI from 'openai';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import { OpenAIRealtimeWebSocket as BetaRealtimeWebSocket } from 'openai/beta/realtime/websocket';

const client = new OpenAI({ apiKey: process.env.GW_KEY!, baseURL: process.env.GW_BASE_URL! });
const model = process.env.GW_MODEL!;
const beta = process.env.GW_CLIENT === 'beta';

/** The part of the SDK's surface this script uses; both clients have it with the same meaning. */
interface RealtimeSocket {
  on(event: 'error', listener: (e: Error) => void): unknown;
  on(event: 'event', listener: (e: { type: string }) => void): unknown;
  close(): void;
  socket: WebSocket;
  url: URL;
}

/** Opens the chosen client and returns it with its opening events, typed by the SDK's own event types. */
function connect(): { rt: RealtimeSocket; start: () => void } {
  if (beta) {
    const b = new BetaRealtimeWebSocket({ model }, client);
    return { rt: b, start: () => {
      b.send({ type: 'session.update', session: { modalities: ['text'], instructions: 'Be brief.' } });
      b.send({ type: 'response.create' });
    } };
  }
  const ga = new OpenAIRealtimeWebSocket({ model }, client);
  return { rt: ga, start: () => {
    ga.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], instructions: 'Be brief.' } });
    ga.send({ type: 'response.create' });
  } };
}
const { rt, start } = connect();
const events: unknown[] = [];
let error: string | null = null;

const finish = (code: number) => {
  console.log(JSON.stringify({ protocol: rt.socket.protocol, url: rt.url.toString(), events, error }));
  rt.close();
  process.exit(code);
};
setTimeout(() => finish(1), 8000);

rt.on('error', (e: Error) => { error = e.message; finish(1); });
rt.on('event', (e: { type: string }) => {
  events.push(e);
  if (e.type === 'response.done') finish(0);
});
rt.socket.addEventListener('open', start);
