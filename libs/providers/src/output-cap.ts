/**
 * An upstream's refusal of a max_tokens above its model's output cap, in the words each server uses, turned into
 * Anthropic's. Every wording is matched from the start of the message (or the whole of it): upstreams echo the
 * client's values later in other errors (a model or tool name, an invalid field), and a client must not be able to
 * word one of those so the refusal is tried on every channel of the model.
 */

/** What a wording states: the cap always, the refused max_tokens when it says it. */
interface CapRefusal {
  cap: number;
  asked?: number;
}

interface CapWording {
  re: RegExp;
  read(m: RegExpExecArray): CapRefusal;
}

const both = (asked: number, cap: number) => (m: RegExpExecArray): CapRefusal => ({ asked: Number(m[asked]), cap: Number(m[cap]) });
const capOnly = (m: RegExpExecArray): CapRefusal => ({ cap: Number(m[1]) });

const WORDINGS: readonly CapWording[] = [
  // OpenAI: "max_tokens is too large: 64000. This model supports at most 16384 completion tokens, whereas you provided 64000."
  { re: /^max_(?:completion_)?tokens is too large: (\d+)\. This model supports at most (\d+) completion tokens/i, read: both(1, 2) },
  // Anthropic (native channels): "max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-…".
  { re: /^max_tokens: (\d+) > (\d+), which is the maximum allowed number of output tokens for /, read: both(1, 2) },
  // Volcengine Ark: "The parameter `max_completion_tokens` specified in the request are not valid: integer above maximum
  // value, expected a value <= 12288, but got 32000 instead. Request id: …" (also unquoted, and with "is").
  { re: /^The parameter `?max_(?:completion_)?tokens`? specified in the request (?:is|are) not valid: integer above maximum value, expected a value <= (\d+), but got (\d+) instead\b/, read: both(2, 1) },
  // Ollama Cloud: "max_tokens (384000) exceeds model's maximum output tokens (65536) for model deepseek-v4-flash:0731".
  { re: /^max_tokens \((\d+)\) exceeds model's maximum output tokens \((\d+)\)/, read: both(1, 2) },
  // Google's Gemini (Vertex AI): "Unable to submit request because it has a maxOutputTokens value of 655360 but the
  // supported range is from 1 (inclusive) to 8193 (exclusive). …": the cap is one below the exclusive bound.
  { re: /^Unable to submit request because it has a maxOutputTokens value of (\d+) but the supported range is from 1 \(inclusive\) to (\d+) \(exclusive\)/, read: (m) => ({ asked: Number(m[1]), cap: Number(m[2]) - 1 }) },
  // DeepInfra: "max_tokens=131072 cannot be greater than max_model_len=max_total_tokens=28672. Please request fewer output tokens. …"
  { re: /^max_tokens=(\d+) cannot be greater than max_model_len=max_total_tokens=(\d+)\./, read: both(1, 2) },
  // DeepSeek: "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]".
  { re: /^Invalid max_tokens value, the valid range of max_tokens is \[1, (\d+)\]/, read: capOnly },
  // Groq: "`max_tokens` must be less than or equal to `16384`, the maximum value for `max_tokens` is less than the
  // `context_window` for this model" (also for max_completion_tokens, and without the backquotes).
  { re: /^`?(max_(?:completion_)?tokens)`? must be less than or equal to `?(\d+)`?, the maximum value for `?\1`? is less than the `?context_window`? for this model/, read: (m) => ({ cap: Number(m[2]) }) },
  // Groq, earlier: "max_tokens for `llama-3.1-8b-instant` must be less than or equal to 8000" (or "for preview model `…`").
  // The model name sits between fixed words, so the whole message must be this sentence.
  { re: /^max_tokens for (?:preview model )?`[^`]{1,200}` must be less than or equal to (\d+)$/, read: capOnly },
];

/** The refusal a message states, or null when it is no output-cap wording known here. */
function capRefusal(detail: string): CapRefusal | null {
  for (const w of WORDINGS) {
    const m = w.re.exec(detail);
    if (m) return w.read(m);
  }
  return null;
}

/**
 * An upstream model's output cap in Anthropic's words (`max_tokens: 64000 > 16384, which is the maximum allowed number
 * of output tokens for this model`), or null. The cap belongs to the channel's upstream model, not to the model the
 * client named: another channel serving that name may take the request (the classification is retryable, no health
 * change). `sentMaxTokens` is the max_tokens the gateway sent, for the wordings that
 * state only the cap (DeepSeek, Groq); unknown, the answer says "max_tokens is above <cap>, …". A refused max_tokens
 * within the stated cap is no output cap (DeepSeek words a max_tokens below 1 the same way): the client's 400.
 */
export function outputCapMessage(detail: string, sentMaxTokens?: number): string | null {
  const r = capRefusal(detail);
  if (!r) return null;
  const asked = r.asked ?? sentMaxTokens;
  // The upstream's model name is left out of the answer: it is the channel's mapping, not the client's business.
  const tail = 'which is the maximum allowed number of output tokens for this model';
  if (asked === undefined) return `max_tokens is above ${r.cap}, ${tail}`;
  return asked > r.cap ? `max_tokens: ${asked} > ${r.cap}, ${tail}` : null;
}
