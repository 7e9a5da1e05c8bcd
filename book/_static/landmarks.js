/* The primary sidebar (course logo, search button, the "Main" table of contents)
   is a plain <div>; its logo link lies outside every landmark (axe rule region).
   Naming the sidebar a navigation landmark, "Course", puts all of it in one. On
   small screens the theme moves the same element into its drawer, role and all. */
document.addEventListener("DOMContentLoaded", () => {
  const sidebar = document.getElementById("pst-primary-sidebar");
  if (sidebar && !sidebar.hasAttribute("role")) {
    sidebar.setAttribute("role", "navigation");
    sidebar.setAttribute("aria-label", "Course");
  }
});
