/**
 * How often and how much the attempt-window tables (SQLite's and PostgreSQL's attempt_windows) are swept of rows
 * idle for two windows. Shared by both stores so their tables are bounded alike.
 */

/** Hits between sweeps (the table stays bounded by the keys in use). */
export const SWEEP_EVERY = 1024;

/**
 * Most rows one sweep deletes, so one sweep is a short index range however many rows a flood from many addresses
 * left idle at once. Above SWEEP_EVERY: a sweep runs once per that many hits, and each hit adds at most one row,
 * so the sweeps delete faster than hits can add and a backlog shrinks by at least the difference every sweep.
 */
export const SWEEP_CHUNK = 4096;
