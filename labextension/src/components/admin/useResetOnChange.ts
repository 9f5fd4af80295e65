import * as React from 'react';

/**
 * Call `reset` when `signature` (what the form was filled from, serialised) changes after the
 * first render: another admin's change, or our own apply. Never at mount, when the form already
 * holds what `reset` would put there: React runs effects after the first paint, so a reset then
 * could undo an edit typed in between (seen under load: a cohort the admin had emptied came back
 * before Apply). A refetch of the same configuration keeps the signature, and the edits.
 */
export function useResetOnChange(signature: string, reset: () => void): void {
  const last = React.useRef(signature);
  React.useEffect(() => {
    if (last.current === signature) {
      return;
    }
    last.current = signature;
    reset();
  }, [signature]);
}
