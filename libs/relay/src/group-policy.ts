import { RATIO_ONE } from '@gw/core';
import type { LimitFields } from './limits';

/** What the request path reads of a group: its price ratio (per-mille), routing fallbacks and limits. */
export interface GroupPolicy extends LimitFields {
  name: string;
  ratio: number;
  fallbacks: string[];
}

/** A group with no record: ×1, no fallbacks, no limits (so deployments without groups behave as before). */
export const defaultPolicy = (name: string): GroupPolicy =>
  ({ name, ratio: RATIO_ONE, fallbacks: [], rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0, modelLimits: null });
