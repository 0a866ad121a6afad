-- A long-context tier set without its own 1-hour cache-write price used to store its 5-minute price there, the
-- old default; the default is now 8/5 of it, rounded up (Anthropic bills 1-hour writes at 2x input, 5-minute ones
-- at 1.25x), and a stored copy would go on billing 1-hour writes at the 5-minute price. A stored 1-hour price equal
-- to the 5-minute one is taken as that old default and raised; an operator who meant it sets it again.
UPDATE prices SET long_context = jsonb_set(long_context, '{cacheWrite1h}', to_jsonb(least(((long_context->>'cacheWrite')::bigint * 8 + 4) / 5, 1000000000000)))
  WHERE long_context IS NOT NULL
    AND (long_context->>'cacheWrite')::bigint > 0
    AND long_context->'cacheWrite1h' = long_context->'cacheWrite';
