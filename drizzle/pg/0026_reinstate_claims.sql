-- Root's dispute reinstatement used to record a call that found no dispute (outcome unknown_dispute or
-- ambiguous_dispute), and an unnamed call under the id ending in ":*": every later call with that id answered
-- "duplicate" and gave nothing back (a dispute named before its withdrawal arrived could never be reinstated, nor a
-- second dispute of the order without naming it). Such claims are no longer written; those written before go. What a
-- reinstatement does rests on the dispute's own state, not on these rows: asked again, one already done is a noop.
DELETE FROM webhook_events WHERE event_id LIKE 'operator:reinstate:%'
  AND (event_id LIKE '%:*' OR outcome IN ('unknown_dispute', 'ambiguous_dispute'));
