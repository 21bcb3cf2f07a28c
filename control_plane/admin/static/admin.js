// Sluice admin: confirmation of destructive actions and copy buttons (the dashboard's
// live refresh is in dashboard.js). No framework.
"use strict";

document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const input = document.getElementById(button.dataset.copy);
  input.select();
  if (navigator.clipboard) {
    navigator.clipboard.writeText(input.value).then(() => { button.textContent = "Copied"; },
      () => { button.textContent = "Press Ctrl+C"; });
  }
});
