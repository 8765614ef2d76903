/*
 * The subagent-tracker dashboard: the sessions list, a chart of the last five minutes and a live,
 * virtualized task tree of the selected session, fed by the server's event stream (api/stream).
 *
 * Rules its modules keep (state, tree_view, render, chart, stream, actions):
 * - Escaping: server data reaches the DOM only through textContent, value, title and dataset; never
 *   through HTML parsing, event-handler attributes, href or src. URLs are relative constants plus ids
 *   passed through encodeURIComponent, so the app also works mounted under a prefix. Ids travel in the
 *   query, never in the path, where a URL parser drops an id of "." or "..".
 * - User text (ids, reasons) is isolated for bidi: by CSS in its own elements, and by U+2068/U+2069
 *   (isolate()) inside a sentence, so a direction override in it cannot reorder the page's own text.
 * - Budget: stream updates are queued and applied in requestAnimationFrame callbacks, about 8 ms of
 *   work per frame. The visible-row list is flattened at most once per frame and only after a change of
 *   shape (a task that appears, moves, or starts or stops being pending, which moves it among its
 *   siblings); otherwise a frame re-renders just the rows in the viewport, the only rows in the DOM.
 */
import { init } from "./actions.js";

init();
