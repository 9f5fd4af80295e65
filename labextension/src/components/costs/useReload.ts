/**
 * Reload a report view: at once, soon after any of the given signals (several close together
 * count once), and every minute.
 */
import { ISignal } from '@lumino/signaling';
import * as React from 'react';

export function useReload(load: () => Promise<void>, signals: ISignal<any, any>[], delayMs: number): void {
  React.useEffect(() => {
    void load();
    let timer = 0;
    const later = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => void load(), delayMs);
    };
    signals.forEach(s => s.connect(later));
    const poll = window.setInterval(() => void load(), 60000);
    return () => {
      signals.forEach(s => s.disconnect(later));
      window.clearTimeout(timer);
      window.clearInterval(poll);
    };
  }, [load]);
}
