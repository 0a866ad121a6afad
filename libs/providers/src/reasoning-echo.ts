/**
 * Whether a translated channel sends thinking back as `reasoning_content` (see toOpenAIRequest's `reasoningEcho`).
 * DeepSeek's thinking mode answers 400 to tool calls sent back without their reasoning and Kimi's thinking models
 * reason worse without it, but OpenAI (and Groq, Mistral) refuse a message field they do not know: so `auto`
 * echoes only to the hosts known to want it.
 */
export const REASONING_ECHO_MODES = ['auto', 'always', 'never'] as const;
export type ReasoningEcho = (typeof REASONING_ECHO_MODES)[number];

/** The official APIs documented to take `reasoning_content` back in assistant messages. */
const ECHO_HOSTS = new Set(['api.deepseek.com', 'api.moonshot.ai', 'api.moonshot.cn']);

/** A stored value that is not a mode (an older row, a hand edit) is `auto`. */
export function reasoningEchoMode(value: unknown): ReasoningEcho {
  return (REASONING_ECHO_MODES as readonly unknown[]).includes(value) ? value as ReasoningEcho : 'auto';
}

/** `auto`'s answer per base URL: a URL parse per translated request is avoidable work on the hot path. */
const autoByUrl = new Map<string, boolean>();
const MAX_REMEMBERED = 10_000;

export function echoesReasoning(mode: ReasoningEcho | undefined, baseUrl: string): boolean {
  if (mode === 'always') return true;
  if (mode === 'never') return false;
  let echo = autoByUrl.get(baseUrl);
  if (echo === undefined) {
    try {
      // One trailing dot is the fully qualified spelling of the same host (the URL parser keeps it).
      echo = ECHO_HOSTS.has(new URL(baseUrl).hostname.toLowerCase().replace(/(?<!\.)\.$/, ''));
    } catch {
      echo = false;
    }
    if (autoByUrl.size >= MAX_REMEMBERED) autoByUrl.clear();
    autoByUrl.set(baseUrl, echo);
  }
  return echo;
}
