/**
 * An integer in a path or query is written in decimal digits. Elysia checks those strings with its `integer` format,
 * `Number.isInteger(+value)`, which also took `0x1`, `1e0`, `+1`, ` 1` and `5.0`: `GET /api/user/0x1` answered
 * user 1 and `?page_size=1e1` a page of 10. Replaced once, for every route, after Elysia registered its own.
 */
import 'elysia';
import { FormatRegistry } from '@sinclair/typebox';

FormatRegistry.Set('integer', (value) => /^-?\d+$/.test(value));
