#!/usr/bin/env bun
/** Entry point of `gw` (`bun run cli …` or the compiled binary). */
import { main } from './main';
import { processIo } from './core/io';

process.exitCode = await main(process.argv.slice(2), processIo());
