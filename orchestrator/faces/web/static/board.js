// The board: the filter form applies as you type; the 2 s poll sends the form too
// (hx-include), so it always shows the current search; polling pauses while a card's form
// is open, so a poll never throws away a reason being typed. No inline script (the page's
// CSP); text only ever goes into .value, never into HTML.
"use strict";

// The non-empty filter values, sorted: two queries that ask the same thing compare equal.
function chosen(entries) {
  const kept = new URLSearchParams();
  for (const [key, value] of entries) {
    if (value && key !== "done") kept.append(key, value);
  }
  kept.sort();
  return kept.toString();
}

let pending = null;
function refilter(delay) {
  clearTimeout(pending);
  pending = setTimeout(() => {
    const board = document.getElementById("board");
    if (board) htmx.trigger(board, "refilter");
  }, delay);
}

function cardFormInUse(board) {
  const active = document.activeElement;
  return board.querySelector("details[open]") !== null || (board.contains(active) && !!active.form);
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("filters");
  if (!form) return;
  form.addEventListener("input", () => {
    if (form.elements.page) form.elements.page.remove(); // a new search starts at page 1
    const query = chosen(new FormData(form));
    history.replaceState(null, "", query ? `/?${query}` : "/");
    refilter(250);
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    refilter(0);
  });
});

document.addEventListener("htmx:beforeRequest", (event) => {
  const board = event.detail.elt;
  const cause = event.detail.requestConfig && event.detail.requestConfig.triggeringEvent;
  if (board.id !== "board" || (cause && cause.type === "refilter")) return;
  if (cardFormInUse(board)) event.preventDefault();
});

// A poll sent before the last keystroke shows an older search: ask again with the form.
document.addEventListener("htmx:afterSettle", (event) => {
  const form = document.getElementById("filters");
  const xhr = event.detail.xhr;
  if (!form || !xhr || !xhr.responseURL) return;
  const asked = new URL(xhr.responseURL);
  if (asked.pathname !== "/board") return;
  if (chosen(asked.searchParams) !== chosen(new FormData(form))) refilter(0);
});

document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
