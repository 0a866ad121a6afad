/**
 * Integers a client sends (ids, unix times) are JS numbers, exact only up to 2^53 − 1, while the stores hold 64
 * bits. A larger one cannot name a row the gateway wrote and was answered differently per backend: SQLite looked it
 * up and found nothing (404, or an empty page), PostgreSQL refused it past 2^63 − 1 (400 value_out_of_range; a
 * role past 2^31 − 1 already), and an unlimited expires_at was stored on one and refused on the other. Every integer
 * field of a route is therefore bounded by its schema, so both backends answer 400 `out_of_range` naming the field
 * before any database sees it (`tests/e2e/integer-bounds.test.ts` checks every route's schemas and answers).
 * Imported as `@gw/core/id-input`, not from the index, so processes that validate nothing do not load TypeBox.
 */
import { Type, type IntegerOptions } from '@sinclair/typebox';

/** The largest integer a request may carry in any field: 2^53 − 1. */
export const MAX_INPUT_INTEGER = Number.MAX_SAFE_INTEGER;

/** A row id in a body (1..2^53 − 1). Path and query ids use the server's `idInput`, which also takes digit strings. */
export const IdInput = (options: IntegerOptions = {}) => Type.Integer({ minimum: 1, maximum: MAX_INPUT_INTEGER, ...options });
