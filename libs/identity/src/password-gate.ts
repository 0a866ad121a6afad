import { availableParallelism } from 'node:os';
import { FifoSlots, GatewayError } from '@gw/core';

export interface PasswordGateLimits {
  /** Password hashes/verifies running at once on this node. */
  slots: number;
  /** Callers that may wait for a slot; one more is refused at once. */
  queue: number;
}

/** Half the cores (at least one): the other half stays free for relayed requests. */
export const defaultPasswordSlots = () => Math.max(1, Math.floor(availableParallelism() / 2));

/**
 * Node-wide admission for argon2id work, the most expensive thing the management API does (tens to hundreds
 * of ms of CPU each, on the cores every relayed request needs too). Without it anyone could have the node run
 * as many hashes at once as they sent logins (any username; an unknown one runs a dummy verify for equal
 * timing), and a user who knows their password as many as they sent token mints. Here `slots` run at once,
 * `queue` more wait their turn in arrival order, and the rest get 503 `password_checks_busy` at once, before
 * anything about the account is read or counted, so the refusal is the same for every username and a flood
 * of it never counts as failed logins against the real owner.
 */
export class PasswordGate {
  private readonly slots: FifoSlots;

  constructor(readonly limits: PasswordGateLimits) {
    this.slots = new FifoSlots(limits.slots);
  }

  /** Takes a slot (waiting in the queue if needed); call the returned function exactly once when done. */
  async acquire(): Promise<() => void> {
    const release = await this.slots.acquire(this.limits.queue);
    if (!release) throw busy();
    return release;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** Running and waiting (tests, metrics). */
  get load(): { running: number; waiting: number } {
    return this.slots.load;
  }
}

const busy = () => new GatewayError(503, 'password_checks_busy', 'Too many password checks in progress on this server; try again shortly', {
  headers: { 'retry-after': '1' },
});

let current = new PasswordGate({ slots: defaultPasswordSlots(), queue: 16 });

/** The node's gate, shared by every route that hashes or verifies a password. */
export const passwordGate = () => current;

/** Set once at startup from the configuration. */
export function usePasswordGate(gate: PasswordGate): void {
  current = gate;
}
