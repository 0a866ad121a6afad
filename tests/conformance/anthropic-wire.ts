/**
 * Checks that what a client received is well-formed Anthropic: a message object, or an SSE stream whose
 * events follow the Messages streaming grammar (message_start, then content blocks opened, filled and
 * closed in index order, then message_delta and message_stop; pings anywhere). Returns the content the
 * stream builds, so tests can assert on it as on a JSON message.
 */
import { expect } from 'bun:test';
import { SseParser } from '@gw/formats';

export interface Received {
  model: string;
  content: any[];
  stopReason: string | null;
  usage: Record<string, number>;
  events: string[];
}

export function checkMessage(m: any): Received {
  expect(m).toMatchObject({ type: 'message', role: 'assistant', id: expect.stringMatching(/^msg_/) });
  expect(Array.isArray(m.content)).toBe(true);
  for (const b of m.content) {
    if (b.type === 'thinking') expect(typeof b.signature).toBe('string');
    if (b.type === 'tool_use') expect(b.input && typeof b.input === 'object' && !Array.isArray(b.input)).toBe(true);
  }
  expect(Number.isInteger(m.usage.input_tokens) && Number.isInteger(m.usage.output_tokens)).toBe(true);
  return { model: m.model, content: m.content, stopReason: m.stop_reason, usage: m.usage, events: [] };
}

export function checkStream(text: string): Received {
  const parser = new SseParser();
  const events = [...parser.push(new TextEncoder().encode(text)), ...parser.end()];
  const names: string[] = [];
  const content: any[] = [];
  let open: number | null = null;
  let start: any = null;
  let delta: any = null;
  let stopped = false;
  for (const ev of events) {
    const data = JSON.parse(ev.data);
    expect(data.type).toBe(ev.event);
    names.push(ev.event!);
    expect(stopped).toBe(false); // nothing after message_stop
    if (ev.event === 'ping') continue;
    if (ev.event === 'error') throw new Error(`stream ended with an error event: ${ev.data}`);
    if (names.filter((n) => n !== 'ping').length === 1) expect(ev.event).toBe('message_start');
    switch (ev.event) {
      case 'message_start': start = data.message; break;
      case 'content_block_start':
        expect(open).toBeNull();
        expect(data.index).toBe(content.length);
        open = data.index;
        if (data.content_block.type === 'thinking') expect(typeof data.content_block.signature).toBe('string');
        content.push({ ...data.content_block, ...(data.content_block.type === 'tool_use' ? { _json: '' } : {}) });
        break;
      case 'content_block_delta': {
        expect(data.index).toBe(open);
        const b = content[data.index];
        const d = data.delta;
        if (d.type === 'text_delta') b.text += d.text;
        else if (d.type === 'thinking_delta') b.thinking += d.thinking;
        else if (d.type === 'signature_delta') b.signature = d.signature;
        else if (d.type === 'input_json_delta') b._json += d.partial_json;
        else throw new Error(`unknown delta ${d.type}`);
        break;
      }
      case 'content_block_stop': {
        expect(data.index).toBe(open);
        const b = content[data.index];
        if (b.type === 'tool_use') b.input = b._json ? JSON.parse(b._json) : {};
        delete b._json;
        open = null;
        break;
      }
      case 'message_delta': expect(open).toBeNull(); delta = data; break;
      case 'message_stop': expect(delta).not.toBeNull(); stopped = true; break;
      default: throw new Error(`unexpected event ${ev.event}`);
    }
  }
  expect(stopped).toBe(true);
  return { model: start.model, content, stopReason: delta.delta.stop_reason, usage: { ...start.usage, ...delta.usage }, events: names };
}
