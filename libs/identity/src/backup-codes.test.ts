import { describe, expect, test } from 'bun:test';
import { BACKUP_CODE_COUNT, generateBackupCodes, hashBackupCode, looksLikeBackupCode, normalizeBackupCode } from './backup-codes';

describe('backup codes', () => {
  test('ten distinct XXXXX-XXXXX Base32 codes', () => {
    const codes = generateBackupCodes();
    expect(codes.length).toBe(BACKUP_CODE_COUNT);
    expect(new Set(codes).size).toBe(codes.length);
    for (const c of codes) expect(c).toMatch(/^[A-Z2-7]{5}-[A-Z2-7]{5}$/);
  });

  test('case, spaces and hyphens are ignored; a 6-digit TOTP never looks like a backup code', () => {
    expect(normalizeBackupCode(' abcde-fg234 ')).toBe('ABCDEFG234');
    expect(looksLikeBackupCode('abcde fg234')).toBe(true);
    expect(looksLikeBackupCode('123456')).toBe(false);
    expect(looksLikeBackupCode('ABCDE-FG23')).toBe(false);
    expect(looksLikeBackupCode('ABCDE-FG231')).toBe(false); // 1 is not Base32
  });

  test('hashes are per user and insensitive to formatting', () => {
    expect(hashBackupCode(1, 'ABCDE-FG234')).toBe(hashBackupCode(1, 'abcdefg234'));
    expect(hashBackupCode(1, 'ABCDE-FG234')).not.toBe(hashBackupCode(2, 'ABCDE-FG234'));
    expect(hashBackupCode(1, 'ABCDE-FG234')).toMatch(/^[0-9a-f]{64}$/);
  });
});
