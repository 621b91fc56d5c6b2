// The task page's draft review: line comments drawn under their lines, the reason, the
// ticked criteria, the files marked viewed and the learnings struck or rewritten (their
// fields belong to the Accept form), kept on the server (POST draft) as they
// change, so a reload or a closed tab loses nothing. The page itself (the comments it
// draws, each with its hidden fields for the Reject form) is the draft: saving reads it.
// Text is only ever set with textContent / value, never as HTML.
"use strict";

const rejectForm = () => document.getElementById("reject-form");

function field(name, value) {
  const input = document.createElement("input");
  input.type = "hidden";
  input.setAttribute("form", "reject-form");
  input.name = name;
  input.value = value;
  return input;
}

// --- the draft: read from the page, sent to the server ---------------------------------

function currentDraft() {
  const comments = [...document.querySelectorAll("li.comment")].map((li) => ({
    path: li.dataset.path,
    line: Number(li.dataset.line),
    end: li.dataset.end ? Number(li.dataset.end) : 0,
    side: li.dataset.side,
    text: li.querySelector(".text").textContent,
  }));
  const ticked = [...document.querySelectorAll("#criteria input:checked")].map(
    (box) => Number(box.dataset.criterion));
  const viewed = {};
  for (const box of document.querySelectorAll("input.viewed-box:checked")) {
    const file = box.closest("details.file");
    viewed[file.dataset.path] = file.dataset.blob;
  }
  const struck = [...document.querySelectorAll("#learnings input.strike:checked")].map(
    (box) => Number(box.dataset.learning));
  const edited = {};
  for (const input of document.querySelectorAll("#learnings input.learning-edit")) {
    if (input.value !== input.dataset.original) edited[input.dataset.learning] = input.value;
  }
  const reason = document.getElementById("reason");
  return {reason: reason ? reason.value : "", comments, ticked, viewed, struck, edited};
}

let saving = Promise.resolve();

function saveDraft() {
  const form = rejectForm();
  if (!form || !form.dataset.task) return saving;
  const status = document.getElementById("draft-status");
  const body = JSON.stringify(currentDraft());
  if (status) status.textContent = "Saving the draft…";
  saving = saving.then(async () => {
    try {
      const reply = await fetch(`/tasks/${form.dataset.task}/draft`, {
        method: "POST",
        credentials: "same-origin",
        headers: {"content-type": "application/json", "x-csrf-token": form.elements.csrf.value},
        body,
      });
      const answer = await reply.json().catch(() => ({}));
      if (status) status.textContent = reply.ok ? "Draft saved." : `Draft not saved: ${answer.error || reply.status}`;
    } catch (err) {
      if (status) status.textContent = "Draft not saved: the server did not answer.";
    }
  });
  return saving;
}

function countComments() {
  const note = document.getElementById("comment-count");
  if (!note) return;
  const n = document.querySelectorAll("li.comment").length;
  note.textContent = `${n} line comment${n === 1 ? "" : "s"}`;
}

// --- line comments ----------------------------------------------------------------------

function commentItem(c) {
  const li = document.createElement("li");
  li.className = "comment";
  Object.assign(li.dataset, {path: c.path, side: c.side, line: String(c.line), end: c.end ? String(c.end) : ""});
  const where = document.createElement("code");
  where.className = "where";
  where.textContent = `${c.path}:${c.side === "old" ? "removed " : ""}${c.line}${c.end > c.line ? "-" + c.end : ""}`;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = c.text;
  const drop = document.createElement("button");
  drop.type = "button";
  drop.className = "drop-comment";
  drop.title = "Remove this comment";
  drop.textContent = "×";
  li.append(where, " ", text, " ", drop,
    field("comment_path", c.path), field("comment_line", String(c.line)),
    field("comment_end", c.end ? String(c.end) : ""), field("comment_side", c.side),
    field("comment_text", c.text));
  return li;
}

// The row under which comments on `row` are drawn (made when there is none yet).
function commentsRowAfter(row) {
  const next = row.nextElementSibling;
  if (next && next.classList.contains("inline-comments")) return next.querySelector("ul");
  const tr = document.createElement("tr");
  tr.className = "inline-comments";
  const td = document.createElement("td");
  td.colSpan = row.closest("table").classList.contains("split") ? 4 : 3;
  const ul = document.createElement("ul");
  ul.className = "comments";
  td.append(ul);
  tr.append(td);
  row.after(tr);
  return ul;
}

function openEditor(file, side, first, last, row) {
  const old = document.querySelector("tr.comment-editor");
  if (old) old.remove();
  const tr = document.createElement("tr");
  tr.className = "comment-editor";
  const td = document.createElement("td");
  td.colSpan = row.closest("table").classList.contains("split") ? 4 : 3;
  const lines = first === last ? `${first}` : `${first}-${last}`;
  const label = `${file.dataset.path}:${side === "old" ? "removed " : ""}${lines}`;
  const box = document.createElement("textarea");
  box.rows = 2;
  box.placeholder = `Comment on ${label}`;
  box.className = "comment-draft";
  const add = document.createElement("button");
  add.type = "button";
  add.textContent = "Add comment";
  add.className = "add-comment";
  const cancel = document.createElement("button");
  cancel.type = "button";
  cancel.textContent = "Cancel";
  cancel.addEventListener("click", () => tr.remove());
  add.addEventListener("click", () => {
    const text = box.value.trim();
    if (!text) return;
    const c = {path: file.dataset.path, side, line: first, end: last > first ? last : 0, text};
    tr.remove();
    commentsRowAfter(row).append(commentItem(c));
    countComments();
    saveDraft();
  });
  td.append(box, add, cancel);
  tr.append(td);
  const after = row.nextElementSibling && row.nextElementSibling.classList.contains("inline-comments")
    ? row.nextElementSibling : row;
  after.after(tr);
  box.focus();
}

let anchor = null; // the line number clicked last: a shift-click makes a range from it

document.addEventListener("click", (event) => {
  const drop = event.target.closest("button.drop-comment");
  if (drop) {
    const li = drop.closest("li.comment");
    const row = li.closest("tr.inline-comments");
    li.remove();
    if (row && !row.querySelector("li")) row.remove();
    countComments();
    saveDraft();
    return;
  }
  const cell = event.target.closest("td.commentable");
  if (!cell || !rejectForm() || !rejectForm().dataset.task) return;
  const file = cell.closest("details.file");
  const side = cell.dataset.side;
  let first = Number(cell.dataset.line);
  let last = first;
  if (event.shiftKey && anchor && anchor.file === file && anchor.side === side) {
    first = Math.min(anchor.line, last);
    last = Math.max(anchor.line, last);
    window.getSelection().removeAllRanges();
  }
  anchor = {file, side, line: Number(cell.dataset.line)};
  const endCell = file.querySelector(`td.commentable[data-side="${side}"][data-line="${last}"]`);
  openEditor(file, side, first, last, (endCell || cell).closest("tr"));
});

// --- reason, criteria, viewed -----------------------------------------------------------

let typing = null;
document.addEventListener("input", (event) => {
  if (event.target.id !== "reason" && !event.target.matches("input.learning-edit")) return;
  const status = document.getElementById("draft-status");
  if (status) status.textContent = "Saving the draft…";
  clearTimeout(typing);
  typing = setTimeout(saveDraft, 500);
});

document.addEventListener("change", (event) => {
  const box = event.target;
  if (box.matches("#criteria input[type=checkbox]")) {
    const all = document.querySelectorAll("#criteria input[type=checkbox]").length;
    const ticked = document.querySelectorAll("#criteria input:checked").length;
    const count = document.getElementById("criteria-count");
    if (count) count.textContent = `${ticked} of ${all} ticked; your ticks are kept with your draft review`;
    saveDraft();
  } else if (box.matches("#learnings input.strike")) {
    saveDraft();
  } else if (box.matches("input.viewed-box")) {
    box.closest("details.file").open = !box.checked;
    const files = document.querySelectorAll("details.file").length;
    const seen = document.querySelectorAll("input.viewed-box:checked").length;
    const count = document.getElementById("viewed-count");
    if (count) count.textContent = `${seen} of ${files} viewed`;
    saveDraft();
  }
});

// A click on the Viewed box must not also fold or unfold the file through its <summary>.
document.addEventListener("click", (event) => {
  if (event.target.closest("label.viewed")) event.stopPropagation();
}, true);

// A form with data-confirm (Accept, when the branch holds more than the last attempt's
// work or would conflict) asks before it is sent. A review sent ends the draft: a save
// still waiting to be typed must not bring it back.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
  clearTimeout(typing);
});

// The Live tab: new output is appended (never the whole log again), the reader's scroll
// position is kept unless they were at the newest line, which it then follows; once the
// attempt has ended the page reloads, once, into review. A navigation the reader started
// (a tab clicked, a link, the address bar) wins: a reload then would abort it, so the page
// only reloads itself when nobody is leaving it.
(function followLive() {
  const live = document.getElementById("live");
  if (!live) return;
  const log = document.getElementById("live-log");
  let offset = Number(live.dataset.offset || 0);
  let busy = false;
  let leaving = 0;  // when the reader last started a navigation away (beforeunload)
  window.addEventListener("beforeunload", () => { leaving = Date.now(); });
  // A navigation that was cancelled (a download, a 204) leaves the page here: then it may
  // reload itself again after a while.
  const readerIsLeaving = () => Date.now() - leaving < 10000;
  const reloadUnlessLeaving = () => {
    if (readerIsLeaving()) return false;
    clearInterval(timer);
    window.location.reload();
    return true;
  };
  log.scrollTop = log.scrollHeight;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      const reply = await fetch(`/tasks/${live.dataset.task}/live.json?after=${offset}`,
                                {credentials: "same-origin"});
      const json = (reply.headers.get("content-type") || "").includes("json");
      if (!reply.ok || !json) {  // signed out (the sign-in page came back), or gone
        reloadUnlessLeaving();
        return;
      }
      const news = await reply.json();
      if (!news.running) {
        reloadUnlessLeaving();
        return;
      }
      if (news.text) {
        const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.append(document.createTextNode(news.text));
        if (atEnd) log.scrollTop = log.scrollHeight;
      }
      offset = news.next;
    } finally {
      busy = false;
    }
  }, 1000);
})();
