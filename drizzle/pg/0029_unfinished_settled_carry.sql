-- What the settled checkpoints of a hold already cost, carried by its checkpoints not yet settled. The leader's sweep
-- kept a settled checkpoint for as long as another checkpoint of its hold was unsettled (billing that hold once it
-- lapsed counts the settled ones against it), so while a sibling never settled the settled rows stayed for good. The
-- sweep now deletes them and adds their cost here, on every unsettled row of the hold, in the same statement; billing
-- a lapsed hold counts the largest such sum of its rows against the hold, as it counted the rows themselves.
ALTER TABLE "realtime_unfinished" ADD COLUMN IF NOT EXISTS "settled_cost" bigint DEFAULT 0 NOT NULL;
