/**
 * A reactor of the `sys` partition's leader (schedule ticks, group status): started once the
 * partition is folded to its tip on the node that leads it, stopped when the lease goes. The sys
 * partition needs a leader only while one of them has work (`needsLeader`); otherwise its lease is
 * let go like an idle queue's.
 */
export interface SysReactor {
  /** This node leads `sys` now and has folded it to its tip. */
  adopt(): void;
  /** This node no longer leads `sys`. */
  drop(): void;
  /** Whether the reactor has work that needs a leader (an enabled schedule, say). */
  needsLeader(): boolean;
}
