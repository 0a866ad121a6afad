import { dlopen, FFIType, ptr } from 'bun:ffi';

/**
 * The calling thread's CPU time in ms (clock_gettime(CLOCK_THREAD_CPUTIME_ID)). On this shared 2-core machine a
 * wall clock also counts the time the thread waited for a CPU, which varied a round by ±50%; the thread's own CPU
 * time leaves that out (it still counts the system calls the thread makes, e.g. SQLite's WAL writes).
 */
const libc = dlopen(process.platform === 'darwin' ? 'libc.dylib' : 'libc.so.6', {
  clock_gettime: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
});
const CLOCK_THREAD_CPUTIME_ID = process.platform === 'darwin' ? 16 : 3;
const ts = new BigInt64Array(2);
const at = ptr(ts);

export function threadCpuMs(): number {
  libc.symbols.clock_gettime(CLOCK_THREAD_CPUTIME_ID, at);
  return Number(ts[0]) * 1000 + Number(ts[1]) / 1e6;
}
