/** Joins a channel origin and an API path with exactly one slash between them. */
export function joinUrl(baseUrl: string, path: string): string {
  return baseUrl.replace(/\/+$/, '') + '/' + path.replace(/^\/+/, '');
}

/** http(s)://host → ws(s)://host, for realtime upstreams. */
export function toWebSocketUrl(url: string): string {
  return url.replace(/^http(s?):\/\//i, (_, s: string) => `ws${s.toLowerCase()}://`);
}
