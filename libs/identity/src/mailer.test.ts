import { describe, expect, test } from 'bun:test';
import { ConfigError } from '@gw/config';
import { Mailer, mailConfig } from './mailer';

describe('mailConfig', () => {
  test('unconfigured by default: sending reports false instead of failing', async () => {
    const cfg = mailConfig({});
    expect(cfg.host).toBeNull();
    const m = new Mailer(cfg);
    expect(m.configured).toBe(false);
    expect(await m.send({ to: 'a@b.c', subject: 's', text: 't' })).toBe(false);
  });

  test('port and TLS defaults follow each other', () => {
    expect(mailConfig({ SMTP_HOST: 'mx' })).toMatchObject({ host: 'mx', port: 587, secure: false });
    expect(mailConfig({ SMTP_HOST: 'mx', SMTP_PORT: '465' })).toMatchObject({ port: 465, secure: true });
    expect(mailConfig({ SMTP_HOST: 'mx', SMTP_SECURE: 'true' })).toMatchObject({ port: 465, secure: true });
    expect(mailConfig({ SMTP_HOST: 'mx', SMTP_PORT: '2525', SMTP_SECURE: 'false' })).toMatchObject({ port: 2525, secure: false });
  });

  test('MAIL_FROM falls back to an address-like SMTP_USER', () => {
    expect(mailConfig({ SMTP_HOST: 'mx', SMTP_USER: 'bot@example.com', SMTP_PASSWORD: 'p' }).from).toBe('bot@example.com');
    expect(mailConfig({ SMTP_HOST: 'mx', MAIL_FROM: 'GW <gw@example.com>' }).from).toBe('GW <gw@example.com>');
  });

  test('bad values stop start-up with one line', () => {
    expect(() => mailConfig({ SMTP_PORT: 'abc' })).toThrow(ConfigError);
    expect(() => mailConfig({ SMTP_SECURE: 'maybe' })).toThrow(ConfigError);
    expect(() => mailConfig({ SMTP_USER: 'u' })).toThrow('SMTP_USER and SMTP_PASSWORD must be set together');
    expect(() => mailConfig({ MAIL_FROM: 'nobody' })).toThrow(ConfigError);
  });
});

describe('Mailer', () => {
  test('with SMTP configured, concurrent first messages share one transport and all arrive; close twice is harmless', async () => {
    const { startSmtp } = await import('../../../tests/helpers/smtp');
    const smtp = await startSmtp();
    try {
      const m = new Mailer(mailConfig(smtp.env));
      const sent = await Promise.all([1, 2, 3].map((i) => m.send({ to: `u${i}@example.com`, subject: `s${i}`, text: 't' })));
      expect(sent).toEqual([true, true, true]);
      for (const i of [1, 2, 3]) await smtp.waitFor((x) => x.subject === `s${i}`);
      m.close();
      m.close();
    } finally {
      await smtp.stop();
    }
  }, 20_000);
});
