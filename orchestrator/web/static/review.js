// Line comments on the review page: click a line number in the diff, write a comment; it
// joins the reject form as a hidden "path:line:text" field (the CLI's --comment form).
// Text is only ever set with textContent / value, never as HTML.
"use strict";

function commentForm(row, path, line) {
  const tr = document.createElement("tr");
  tr.className = "comment-editor";
  const td = document.createElement("td");
  td.colSpan = 3;
  const box = document.createElement("textarea");
  box.rows = 2;
  box.placeholder = `Comment on ${path}:${line}`;
  box.name = "line-comment-draft";
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
    addComment(path, line, text);
    row.classList.add("commented");
    tr.remove();
  });
  td.append(box, add, cancel);
  tr.append(td);
  row.after(tr);
  box.focus();
}

function addComment(path, line, text) {
  const form = document.getElementById("reject-form");
  const list = document.getElementById("comments");
  if (!form || !list) return;
  const item = document.createElement("li");
  const where = document.createElement("code");
  where.textContent = `${path}:${line}`;
  const what = document.createElement("span");
  what.textContent = " " + text;
  const field = document.createElement("input");
  field.type = "hidden";
  field.name = "comment";
  field.value = `${path}:${line}:${text}`;
  const drop = document.createElement("button");
  drop.type = "button";
  drop.textContent = "×";
  drop.title = "Remove this comment";
  drop.addEventListener("click", () => item.remove());
  item.append(where, what, field, drop);
  list.append(item);
}

document.addEventListener("click", (event) => {
  const cell = event.target.closest("td.commentable");
  if (!cell || !document.getElementById("reject-form")) return;
  const row = cell.closest("tr");
  if (row.nextElementSibling && row.nextElementSibling.classList.contains("comment-editor")) return;
  const path = cell.closest("section.file").dataset.path;
  commentForm(row, path, cell.dataset.line);
});

// A form with data-confirm (Accept, when the branch holds more than the last attempt's
// work or would conflict) asks before it is sent.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// The Live tab: new output is appended (never the whole log again), the reader's scroll
// position is kept unless they were at the newest line, which it then follows; once the
// attempt has ended the page reloads, once, into review.
(function followLive() {
  const live = document.getElementById("live");
  if (!live) return;
  const log = document.getElementById("live-log");
  let offset = Number(live.dataset.offset || 0);
  let busy = false;
  log.scrollTop = log.scrollHeight;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      const reply = await fetch(`/tasks/${live.dataset.task}/live.json?after=${offset}`,
                                {credentials: "same-origin"});
      if (!reply.ok) return;
      const news = await reply.json();
      if (!news.running) {
        clearInterval(timer);
        window.location.reload();
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
