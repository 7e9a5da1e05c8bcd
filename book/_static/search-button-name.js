/* The theme's search field button reads "Search Ctrl+K" on screen but is named
   "Search" by its aria-label, so speech users who say what they see ("click
   Search Ctrl K") miss it (WCAG 2.5.3, axe rule label-content-name-mismatch).
   Without the aria-label its name is its visible text. The button only works
   with JavaScript (the theme hides it otherwise), so fixing it here is enough. */
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".search-button-field[aria-label]").forEach((button) => button.removeAttribute("aria-label"));
});
