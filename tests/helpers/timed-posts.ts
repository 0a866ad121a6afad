/**
 * Sends JSON POSTs one after another and prints each one's time to its complete answer (ms, JSON array), from
 * a process of its own: timing measured in the test's process would include whatever else that process runs
 * meanwhile (the SMTP double receiving mail, a cluster proxy), not only the gateway's answer.
 * stdin: {"url": "...", "bodies": [ ... ]}. A non-200 answer is printed as -status.
 */
const { url, bodies } = JSON.parse(await Bun.stdin.text()) as { url: string; bodies: unknown[] };
const times: number[] = [];
for (const body of bodies) {
  const t = performance.now();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await res.arrayBuffer();
  times.push(res.status === 200 ? performance.now() - t : -res.status);
}
console.log(JSON.stringify(times));
export {};
