## A 64-bit installer when the NSIS at hand has the amd64 stubs (Debian's does; the official
## Windows build does not): scripts/package.sh passes -DCUBICLE_TARGET_AMD64.
!ifdef CUBICLE_TARGET_AMD64
Target amd64-unicode
!else
Unicode true
!endif

####
## Cubicle's Windows installer (NSIS 3), in Wails v2's layout: `wails build --nsis` uses it,
## and so does scripts/package.sh, which cross-builds on Linux:
##   makensis -DARG_WAILS_AMD64_BINARY=/path/to/cubicle.exe build/windows/installer/project.nsi
## The installer goes to build/bin/cubicle-amd64-installer.exe.
##
## Unlike Wails' template it downloads nothing while building: when the WebView2 runtime is
## missing (Windows 11 ships it; Windows 10 gets it with Edge), the installer says so and
## offers Microsoft's download page instead of embedding the bootstrapper.
## Uninstalling removes the program, never the user's data (%AppData%\Cubicle: agents,
## chats, settings) nor the desktops' volumes in the container engine.
####
## INFO_PRODUCTVERSION etc. come from wails_tools.nsh (wails.json's "info"); -D overrides.
!include "wails_tools.nsh"

VIProductVersion "${INFO_PRODUCTVERSION}.0"
VIFileVersion    "${INFO_PRODUCTVERSION}.0"

VIAddVersionKey "CompanyName"     "${INFO_COMPANYNAME}"
VIAddVersionKey "FileDescription" "${INFO_PRODUCTNAME} Installer"
VIAddVersionKey "ProductVersion"  "${INFO_PRODUCTVERSION}"
VIAddVersionKey "FileVersion"     "${INFO_PRODUCTVERSION}"
VIAddVersionKey "LegalCopyright"  "${INFO_COPYRIGHT}"
VIAddVersionKey "ProductName"     "${INFO_PRODUCTNAME}"

ManifestDPIAware true

!include "MUI2.nsh"

!define MUI_ICON "..\icon.ico"
!define MUI_UNICON "..\icon.ico"
!define MUI_FINISHPAGE_NOAUTOCLOSE
!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\${PRODUCT_EXECUTABLE}"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

Name "${INFO_PRODUCTNAME}"
OutFile "..\..\bin\${INFO_PROJECTNAME}-${ARCH}-installer.exe"
InstallDir "$PROGRAMFILES64\${INFO_PRODUCTNAME}"
ShowInstDetails show

!define WEBVIEW2_KEY "SOFTWARE\WOW6432Node\Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}"
!define WEBVIEW2_DOWNLOAD "https://developer.microsoft.com/microsoft-edge/webview2/#download-section"

# cubicle.webview2check looks for the WebView2 runtime the desktop window needs and, when it
# is missing, says so (and offers the download page unless the install is silent).
!macro cubicle.webview2check
    SetRegView 64
    ReadRegStr $0 HKLM "${WEBVIEW2_KEY}" "pv"
    ${If} $0 == ""
        ReadRegStr $0 HKCU "Software\Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}" "pv"
    ${EndIf}
    ${If} $0 == ""
        DetailPrint "The Microsoft Edge WebView2 runtime is missing: Cubicle's window needs it (${WEBVIEW2_DOWNLOAD}); `cubicle serve` works without it."
        IfSilent webview2done
        MessageBox MB_YESNO|MB_ICONINFORMATION "Cubicle's window needs the Microsoft Edge WebView2 runtime, which this computer does not have yet.$\r$\n$\r$\nOpen Microsoft's download page now?" IDNO webview2done
        ExecShell "open" "${WEBVIEW2_DOWNLOAD}"
    ${Else}
        DetailPrint "WebView2 runtime $0 found."
    ${EndIf}
    webview2done:
!macroend

Function .onInit
   !insertmacro wails.checkArchitecture
FunctionEnd

Section
    !insertmacro wails.setShellContext

    !insertmacro cubicle.webview2check

    SetOutPath $INSTDIR

    !insertmacro wails.files

    CreateShortcut "$SMPROGRAMS\${INFO_PRODUCTNAME}.lnk" "$INSTDIR\${PRODUCT_EXECUTABLE}"
    CreateShortCut "$DESKTOP\${INFO_PRODUCTNAME}.lnk" "$INSTDIR\${PRODUCT_EXECUTABLE}"

    !insertmacro wails.writeUninstaller
SectionEnd

Section "uninstall"
    !insertmacro wails.setShellContext

    RMDir /r "$AppData\${PRODUCT_EXECUTABLE}" # WebView2's cache for this program, not Cubicle's data

    Delete "$INSTDIR\${PRODUCT_EXECUTABLE}"
    Delete "$SMPROGRAMS\${INFO_PRODUCTNAME}.lnk"
    Delete "$DESKTOP\${INFO_PRODUCTNAME}.lnk"

    !insertmacro wails.deleteUninstaller

    RMDir "$INSTDIR" # only when empty: never a folder the user keeps other files in
SectionEnd
