/**
 * Rate windows are two fixed windows aligned to multiples of their length (wall clock; Redis uses
 * the same machine's clock), the previous one weighted by the share of it the sliding window still
 * covers. Hits made just before a boundary therefore count a little less than whole just after it:
 * floor(4 × 0.99) is 3, so a fifth hit passes. That is the estimate's documented approximation, not
 * a bug, so a test that makes N hits and expects the next one refused makes them all in one window.
 * The wait can take up to `needMs`: a test that calls this sets its own timeout (30 s), since Bun's default
 * is 5 s whatever bunfig.toml says.
 */
export async function clearOfWindowEdge(needMs = 6_000, windowMs = 60_000): Promise<void> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await Bun.sleep(left + 50);
}

/**
 * Budget periods are UTC calendar days and months (every month's end is a day's end). A test that spends against a
 * budget and expects refusals, thresholds or a `spent` total must do it all in one period: across midnight the spend
 * starts again from 0 and more requests pass. A file calls this before it starts its gateway, with `needMs` covering
 * its whole run, and gives that hook a timeout above `needMs`.
 */
export const clearOfUtcDayEnd = (needMs = 120_000): Promise<void> => clearOfWindowEdge(needMs, 86_400_000);
