import { describe, expect, test } from 'bun:test';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configPath, normalizeUrl, readConfig, resolveCredentials, updateConfig } from './config';
import { UsageError } from './errors';

describe('configPath', () => {
  test('GW_CONFIG, then an absolute XDG_CONFIG_HOME, then ~/.config', () => {
    expect(configPath({ GW_CONFIG: '/x/c.json', XDG_CONFIG_HOME: '/xdg', HOME: '/h' })).toBe('/x/c.json');
    expect(configPath({ XDG_CONFIG_HOME: '/xdg', HOME: '/h' })).toBe('/xdg/ai-gateway/config.json');
    // A relative XDG_CONFIG_HOME is invalid per the XDG spec and ignored.
    expect(configPath({ XDG_CONFIG_HOME: 'rel', HOME: '/h' })).toBe('/h/.config/ai-gateway/config.json');
  });
});

describe('resolveCredentials', () => {
  const file = { url: 'http://file:1/', token: 'gwm_file' };
  test('flags > env > file, per value', () => {
    expect(resolveCredentials({}, {}, file)).toMatchObject({ url: 'http://file:1', token: 'gwm_file', source: { url: 'file', token: 'file' } });
    expect(resolveCredentials({}, { GATEWAY_TOKEN: 'gwm_env' }, file)).toMatchObject({ url: 'http://file:1', token: 'gwm_env', source: { token: 'env' } });
    expect(resolveCredentials({ token: 'gwm_flag' }, { GATEWAY_TOKEN: 'gwm_env' }, file)).toMatchObject({ token: 'gwm_flag', source: { token: 'flag' } });
    expect(resolveCredentials({ url: 'http://flag:3' }, { GATEWAY_URL: 'http://env:2', GATEWAY_TOKEN: 't' }, file)).toMatchObject({ url: 'http://flag:3', source: { url: 'flag' } });
  });

  test("the file's token is never paired with another gateway's URL", () => {
    expect(resolveCredentials({}, { GATEWAY_URL: 'http://elsewhere:2' }, file)!.token).toBeUndefined();
    expect(resolveCredentials({}, { GATEWAY_URL: 'http://file:1' }, file)!.token).toBe('gwm_file');
  });

  test("GATEWAY_TOKEN is never paired with another gateway's URL either (alone it goes to any URL)", () => {
    expect(resolveCredentials({ url: 'http://flag:3' }, { GATEWAY_URL: 'http://env:2', GATEWAY_TOKEN: 'gwm_env' }, {})!.token).toBeUndefined();
    expect(resolveCredentials({ url: 'http://env:2/' }, { GATEWAY_URL: 'http://env:2', GATEWAY_TOKEN: 'gwm_env' }, {})!.token).toBe('gwm_env');
    expect(resolveCredentials({ url: 'http://flag:3' }, { GATEWAY_TOKEN: 'gwm_env' }, {})!.token).toBe('gwm_env');
    // The file's own pair still applies when the flag names the file's gateway.
    expect(resolveCredentials({ url: 'http://file:1' }, { GATEWAY_URL: 'http://env:2', GATEWAY_TOKEN: 'gwm_env' }, file)!.token).toBe('gwm_file');
  });

  test('no URL anywhere: undefined; a bad URL: usage error', () => {
    expect(resolveCredentials({}, {}, {})).toBeUndefined();
    expect(() => normalizeUrl('localhost:3000')).toThrow(UsageError);
    expect(() => normalizeUrl('not a url')).toThrow(UsageError);
    expect(normalizeUrl('https://gw.example.com/base//')).toBe('https://gw.example.com/base');
  });

  test('a URL with credentials is a usage error that does not repeat the password', () => {
    for (const url of ['https://ops:hunter2@gw.example.com', 'https://ops@gw.example.com', 'https://:hunter2@gw.example.com']) {
      expect(() => normalizeUrl(url)).toThrow(/must not contain credentials/);
      try { normalizeUrl(url); } catch (e) { expect((e as Error).message).not.toContain('hunter2'); }
    }
    // Refused for another reason first (scheme, port), the message echoed the URL as given, password included:
    // GATEWAY_URL in a CI job's environment put it in the job's log.
    for (const url of ['ftp://ops:hunter2@gw.example.com', 'https://ops:hunter2@gw.example.com:99999', 'https://ops:hunter2@gw example.com']) {
      expect(() => normalizeUrl(url)).toThrow(UsageError);
      try { normalizeUrl(url); } catch (e) { expect((e as Error).message).not.toContain('hunter2'); }
    }
  });
});

describe('updateConfig', () => {
  test('waits for a held lock, takes over one left by a killed process, and removes its own', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-'));
    const path = join(dir, 'cfg', 'config.json');
    try {
      await updateConfig(path, () => ({ token_id: 1 }));
      // Another gw holds the lock: this write waits for it and then sees that process's write.
      writeFileSync(`${path}.lock`, '');
      const waiting = updateConfig(path, (c) => ({ token_id: (c.token_id ?? 0) + 1 }));
      await Bun.sleep(150);
      expect(readConfig(path).token_id).toBe(1);
      writeFileSync(path, JSON.stringify({ token_id: 10 }));
      rmSync(`${path}.lock`);
      await waiting;
      expect(readConfig(path).token_id).toBe(11);
      expect(existsSync(`${path}.lock`)).toBe(false);
      // A lock older than 30 s was left by a killed process: taken over. undefined leaves the file as it is.
      writeFileSync(`${path}.lock`, '');
      utimesSync(`${path}.lock`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
      await updateConfig(path, () => undefined);
      expect(readConfig(path).token_id).toBe(11);
      expect(existsSync(`${path}.lock`)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a process removes only its own lock, never one another process holds by then", async () => {
    // Two processes taking over one left-behind lock at once each removed it and created their own: the second's
    // remove took the first's fresh lock, and the first's final remove then freed the second's while it held it.
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-'));
    const path = join(dir, 'config.json');
    try {
      await updateConfig(path, () => {
        // Another process's lock replaces this one's while it writes.
        rmSync(`${path}.lock`);
        writeFileSync(`${path}.lock`, 'another process');
        return { token_id: 1 };
      });
      expect(readFileSync(`${path}.lock`, 'utf8')).toBe('another process');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('processes taking over one left-behind lock at once: one holds it at a time', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-'));
    const path = join(dir, 'config.json');
    try {
      writeFileSync(path, JSON.stringify({ token_id: 0 }));
      writeFileSync(`${path}.lock`, '');
      utimesSync(`${path}.lock`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
      // Each increments under the lock, holding it across a real wait: an overlap loses an increment.
      const workers = Array.from({ length: 6 }, () => Bun.spawn([process.execPath, '-e', `
        const { updateConfig } = await import(${JSON.stringify(join(import.meta.dir, 'config.ts'))});
        await updateConfig(${JSON.stringify(path)}, (c) => { Bun.sleepSync(30); return { token_id: (c.token_id ?? 0) + 1 }; });
      `], { stderr: 'inherit' }));
      await Promise.all(workers.map((w) => w.exited));
      expect(workers.map((w) => w.exitCode)).toEqual([0, 0, 0, 0, 0, 0]);
      expect(readConfig(path).token_id).toBe(6);
      expect(readdirSync(dir).sort()).toEqual(['config.json']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);
});
