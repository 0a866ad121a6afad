-- The sweep of idle attempt windows (every 1024 hits) read the whole table: its condition was an expression of
-- two columns, which no index had. Now it is a generated column, computed for existing rows too, with an index
-- the sweep reads a range of; the index on `start` served nothing else and is dropped.
DROP INDEX `attempt_windows_start_idx`;--> statement-breakpoint
ALTER TABLE `attempt_windows` ADD `expires_at` integer GENERATED ALWAYS AS (start + 2 * window_ms) VIRTUAL;--> statement-breakpoint
CREATE INDEX `attempt_windows_expires_idx` ON `attempt_windows` (`expires_at`);