package images

// DesktopRepository is the repository every desktop image is tagged in
// (localhost/cubicle-desktop:<key>-<hash12>); housekeeping lists its unused tags.
const DesktopRepository = desktopRepo
