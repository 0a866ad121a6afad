import { describe, expect, test } from 'bun:test';
import { LookupsBusy, PaymentLookups } from './payment-lookups';

describe('PaymentLookups', () => {
  test('deliveries at once share one request; one just after it ended gets its answer without asking', async () => {
    let t = 1_000;
    const l = new PaymentLookups(8, 10_000, () => t);
    let asked = 0;
    let release!: (v: string | null) => void;
    const ask = () => { asked++; return new Promise<string | null>((r) => { release = r; }); };
    const first = Promise.all([l.tradeNo('a:pi_1', ask), l.tradeNo('a:pi_1', ask)]);
    release('T1');
    expect(await first).toEqual(['T1', 'T1']);
    t += 9_999;
    expect(await l.tradeNo('a:pi_1', async () => { asked++; return 'other'; })).toBe('T1');
    expect(asked).toBe(1);
    // After the kept time the API is asked again.
    t += 2;
    expect(await l.tradeNo('a:pi_1', async () => { asked++; return 'T1'; })).toBe('T1');
    expect(asked).toBe(2);
  });

  test('"not ours" (null) is kept too; a failure is not', async () => {
    const l = new PaymentLookups();
    let asked = 0;
    expect(await l.tradeNo('a:pi_x', async () => { asked++; return null; })).toBeNull();
    expect(await l.tradeNo('a:pi_x', async () => { asked++; return 'no'; })).toBeNull();
    await expect(l.tradeNo('a:pi_y', async () => { asked++; throw new Error('API down'); })).rejects.toThrow('API down');
    expect(await l.tradeNo('a:pi_y', async () => { asked++; return 'T2'; })).toBe('T2');
    expect(asked).toBe(3);
  });

  test('kept answers do not count against the in-flight bound; the bound still refuses the ninth running payment', async () => {
    const l = new PaymentLookups(2);
    for (let i = 0; i < 5; i++) await l.tradeNo(`a:pi_done${i}`, async () => 'T');
    const hang = () => new Promise<string | null>(() => {});
    void l.tradeNo('a:pi_r1', hang);
    void l.tradeNo('a:pi_r2', hang);
    await expect(l.tradeNo('a:pi_r3', hang)).rejects.toBeInstanceOf(LookupsBusy);
    expect(await l.tradeNo('a:pi_done3', hang)).toBe('T');
  });

  test('the kept answers are bounded: the oldest goes first', async () => {
    const l = new PaymentLookups();
    for (let i = 0; i <= 1024; i++) await l.tradeNo(`k${i}`, async () => `T${i}`);
    let asked = 0;
    expect(await l.tradeNo('k0', async () => { asked++; return 'again'; })).toBe('again');
    expect(await l.tradeNo('k1024', async () => { asked++; return 'no'; })).toBe('T1024');
    expect(asked).toBe(1);
  });
});
