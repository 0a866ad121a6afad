import { describe, expect, test } from 'bun:test';
import { configPath, normalizeUrl, resolveCredentials } from './config';
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
});
