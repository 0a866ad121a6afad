-- Budgets and low-balance thresholds join the change feed (t = "budgets"): every node admits against
-- its in-memory budget book, which reloads (both small tables) when another node sets or clears one.
-- A charge moves spent, alerted and period_key only: the UPDATE trigger names the columns a
-- management write sets (`UPDATE OF`), so charges do not even evaluate it (see 0008_change_feed).
CREATE TRIGGER gw_change_budgets AFTER INSERT OR DELETE ON budgets
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('id', 'id', 'budgets');
--> statement-breakpoint
CREATE TRIGGER gw_change_budgets_update AFTER UPDATE OF limit_amount, scope, subject_id, period ON budgets
  FOR EACH ROW WHEN (OLD.limit_amount IS DISTINCT FROM NEW.limit_amount OR OLD.scope IS DISTINCT FROM NEW.scope
    OR OLD.subject_id IS DISTINCT FROM NEW.subject_id OR OLD.period IS DISTINCT FROM NEW.period)
  EXECUTE FUNCTION gw_notify_change('id', 'id', 'budgets');
--> statement-breakpoint
CREATE TRIGGER gw_change_low_balance AFTER INSERT OR DELETE OR UPDATE ON low_balance_alerts
  FOR EACH ROW EXECUTE FUNCTION gw_notify_change('user_id', 'id', 'budgets');
